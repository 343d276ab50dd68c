"""The console producer's line parsing and the console consumer's kcat formats (pure)."""

from __future__ import annotations

import json

import pytest

from strandline.cli.record_format import (DEFAULT_FORMAT, FormatError, InputError, LineParser, Record,
                                          compile_format, parse_header, render_json)

REC = Record("events", 2, 41, 1700000000123, b"k1", b"hello", [("origin", b"cli"), ("empty", None)])


def test_every_kcat_token_and_escape():
    render = compile_format("%t|%p|%o|%T|%k|%K|%s|%S|%h|%%|\\t|\\n|\\r|\\\\")
    assert render(REC) == b"events|2|41|1700000000123|k1|2|hello|5|origin=cli,empty=|%|\t|\n|\r|\\"


def test_the_default_prints_the_value_and_a_newline_like_kafkas_console_consumer():
    assert compile_format(DEFAULT_FORMAT)(REC) == b"hello\n"


def test_null_key_and_value_print_nothing_and_length_minus_one():
    rec = Record("t", 0, 0, 0, None, None, [])
    assert compile_format("[%k][%s] %K %S %h")(rec) == b"[][] -1 -1 "


def test_binary_values_pass_through_unchanged():
    rec = Record("t", 0, 0, 0, None, b"\x00\xff\n", [])
    assert compile_format("%s")(rec) == b"\x00\xff\n"


@pytest.mark.parametrize("fmt", ["%x", "abc%", "%s %q"])
def test_an_unknown_token_is_refused_by_name(fmt):
    with pytest.raises(FormatError, match="unknown token"):
        compile_format(fmt)


def test_a_lone_backslash_stays_literal():
    assert compile_format("a\\qb")(REC) == b"a\\qb"


def test_json_keeps_nulls_and_headers_in_order():
    got = json.loads(render_json(Record("t", 1, 5, 9, None, b"v", [("a", b"1"), ("a", b"2"), ("n", None)])))
    assert got == {"topic": "t", "partition": 1, "offset": 5, "timestamp": 9, "key": None, "value": "v",
                   "headers": [["a", "1"], ["a", "2"], ["n", None]]}
    assert render_json(REC).endswith(b"\n") and render_json(REC).count(b"\n") == 1


def test_lines_without_a_key_delimiter_are_values():
    assert LineParser().parse(b"a:b", 1) == (None, b"a:b")


def test_the_key_ends_at_the_first_delimiter():
    assert LineParser(b":").parse(b"k:a:b", 1) == (b"k", b"a:b")
    assert LineParser(b"::").parse(b"k::v", 1) == (b"k", b"v")
    assert LineParser(b":").parse(b":v", 1) == (b"", b"v")


def test_a_line_without_the_delimiter_is_refused_naming_the_line():
    with pytest.raises(InputError, match="line 7 has no key delimiter ':'"):
        LineParser(b":").parse(b"no delimiter", 7)


def test_the_null_marker_makes_a_null_key_or_a_tombstone():
    parser = LineParser(b":", b"NULL")
    assert parser.parse(b"k:NULL", 1) == (b"k", None)
    assert parser.parse(b"NULL:v", 1) == (None, b"v")
    assert parser.parse(b"k:NULLS", 1) == (b"k", b"NULLS")
    assert LineParser(None, b"-").parse(b"-", 1) == (None, None)


def test_headers_are_name_equals_value():
    assert parse_header("a=b=c") == ("a", b"b=c")
    assert parse_header("a=") == ("a", b"")
    for bad in ("a", "=b", ""):
        with pytest.raises(InputError, match="NAME=VALUE"):
            parse_header(bad)
