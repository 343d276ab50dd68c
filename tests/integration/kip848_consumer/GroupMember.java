import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One member of a consumer group of the KIP-848 protocol (group.protocol=consumer): it consumes
 * a topic, commits what it processed after each poll and before it gives a partition up, and
 * prints, one line each, with the wall clock in ms:
 * READY ms, ASSIGNED|REVOKED|LOST partition ms, RECORD partition offset value, COMMIT_FAILED error,
 * CLOSED ms. Started ahead (the JVM's start is slow), it subscribes once the go-file exists; it
 * leaves the group (and exits) once the stop-file exists. A commit refused for a stale member
 * epoch (the heartbeat with the new one is on its way) is made again with the next one.
 * Arguments: bootstrap group topic go-file stop-file [protocol]: the group protocol, consumer (the
 * default) or classic (with the cooperative-sticky assignor), to upgrade and downgrade a live group.
 */
public final class GroupMember {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true);
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        String protocol = args.length > 5 ? args[5] : "consumer";
        props.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            props.put("partition.assignment.strategy",
                      "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
        }
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        Path go = Path.of(args[3]);
        Path stop = Path.of(args[4]);
        Map<TopicPartition, OffsetAndMetadata> processed = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            out.println("READY " + System.currentTimeMillis());
            while (!Files.exists(go)) {
                Thread.sleep(20);
            }
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    Map<TopicPartition, OffsetAndMetadata> mine = new HashMap<>();
                    for (TopicPartition tp : partitions) {
                        OffsetAndMetadata o = processed.remove(tp);
                        if (o != null) {
                            mine.put(tp, o);
                        }
                    }
                    commit(consumer, mine, out);
                    for (TopicPartition tp : partitions) {
                        out.println("REVOKED " + tp.partition() + " " + System.currentTimeMillis());
                    }
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions) {
                        out.println("ASSIGNED " + tp.partition() + " " + System.currentTimeMillis());
                    }
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions) {
                        processed.remove(tp);
                        out.println("LOST " + tp.partition() + " " + System.currentTimeMillis());
                    }
                }
            });
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> r : records) {
                    out.println("RECORD " + r.partition() + " " + r.offset() + " " + r.value());
                    processed.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                if (!records.isEmpty()) {
                    commit(consumer, new HashMap<>(processed), out);
                }
            }
            commit(consumer, processed, out);
        }
        out.println("CLOSED " + System.currentTimeMillis());
    }

    static void commit(KafkaConsumer<String, String> consumer, Map<TopicPartition, OffsetAndMetadata> offsets,
                       PrintStream out) {
        if (offsets.isEmpty()) {
            return;
        }
        try {
            consumer.commitSync(offsets, Duration.ofSeconds(20));
        } catch (RuntimeException e) {
            out.println("COMMIT_FAILED " + e.getClass().getSimpleName() + ": " + e.getMessage());
        }
    }
}
