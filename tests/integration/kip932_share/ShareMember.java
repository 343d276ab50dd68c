import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One consumer of a share group (KIP-932) with explicit acknowledgement. For each record it
 * prints, with no delay, a line "RECORD partition offset deliveryCount receivedMillis value" (the
 * wall clock's milliseconds when the poll returned it); then it accepts
 * the record, or releases it when its value starts with "poison" (so that it comes back until the
 * delivery limit archives it), or rejects it when its value starts with "reject" (archived at once,
 * never delivered again), or, in the mode "hold", acknowledges nothing and polls no more
 * after its first records (a consumer that hangs holding its locks, to be killed). It commits
 * the acknowledgements after each poll.
 * It prints "READY" once created, subscribes once the go-file exists, and closes (printing
 * "CLOSED") once the stop-file exists.
 * Arguments: bootstrap group topic mode(ack|hold) go-file stop-file.
 */
public final class ShareMember {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true);
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        boolean hold = args[3].equals("hold");
        Path go = Path.of(args[4]);
        Path stop = Path.of(args[5]);
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            out.println("READY " + System.currentTimeMillis());
            while (!Files.exists(go)) {
                Thread.sleep(20);
            }
            consumer.subscribe(List.of(args[2]));
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    short count = record.deliveryCount().orElse((short) -1);
                    out.println("RECORD " + record.partition() + " " + record.offset() + " " + count + " "
                        + System.currentTimeMillis() + " " + record.value());
                    if (hold) {
                        continue;
                    }
                    AcknowledgeType type = record.value().startsWith("poison") ? AcknowledgeType.RELEASE
                        : record.value().startsWith("reject") ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                    consumer.acknowledge(record, type);
                }
                if (!records.isEmpty()) {
                    out.println("POLLED " + records.count());
                }
                if (hold && !records.isEmpty()) {
                    // hangs holding the locks (explicit mode polls no more until they are acknowledged)
                    while (!Files.exists(stop)) {
                        Thread.sleep(20);
                    }
                } else if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
        out.println("CLOSED " + System.currentTimeMillis());
    }
}
