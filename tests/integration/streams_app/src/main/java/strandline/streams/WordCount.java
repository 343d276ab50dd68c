package strandline.streams;

import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Word count with exactly-once processing (exactly_once_v2): lines from the input topic are split into
 * words, re-keyed by word (through a repartition topic), counted in a state store backed by a changelog
 * topic, and every new count is written to the output topic (key: the word, value: the count as a
 * long). The record cache is off, so each word read gives one output record: a word's committed counts
 * are 1, 2, 3, ... with none missing or repeated.
 *
 * <p>Arguments: bootstrap servers, input topic, output topic, application.id, state directory, stream
 * threads, and optionally the processing.guarantee (exactly_once_v2 unless given: at_least_once, with
 * its default commit interval of 30 s, shows what the exactly-once check catches, counts repeated
 * after a kill). Prints "STATE <state>" on each state change; exits with status 2 when the client stops on
 * an error (the error is printed first).
 */
public final class WordCount {
    private WordCount() {
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 6 && args.length != 7) {
            System.err.println("usage: WordCount BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR THREADS [GUARANTEE]");
            System.exit(64);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[5]));
        String guarantee = args.length == 7 ? args[6] : StreamsConfig.EXACTLY_ONCE_V2;
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        if (guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)) {
            // a transaction every 100 ms (Kafka Streams' default with exactly once, written out);
            // at least once keeps its default of 30 s between offset commits
            props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        }
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.topicPrefix(TopicConfig.MIN_IN_SYNC_REPLICAS_CONFIG), "2");
        // a killed instance's members leave the group after 6 s (the brokers' minimum), not 45 s
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[1], Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\s+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(args[2], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        int[] status = {0};
        streams.setUncaughtExceptionHandler(error -> {
            System.out.println("ERROR " + error);
            error.printStackTrace();
            status[0] = 2;
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
        streams.close();
        System.exit(status[0]);
    }
}
