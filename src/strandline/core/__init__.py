"""The vocabulary every component of the broker shares, below all of them: the effects the core
returns to its shell (:mod:`.effects`), the outbox through which a component waits for an answer
(:mod:`.outbox`) and the broker's configuration (:mod:`.config`). It imports no component."""
