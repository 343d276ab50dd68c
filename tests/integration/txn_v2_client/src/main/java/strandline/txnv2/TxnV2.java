package strandline.txnv2;

import java.lang.reflect.Field;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Runs TRANSACTIONS transactions of one transactional producer: each writes "txn{i}-p{p}" to every
 * partition of TOPIC and commits the offset i + 1 of TOPIC-0 for GROUP (sendOffsetsToTransaction);
 * every third one (i % 3 == 2) is aborted, the others committed. Prints, per transaction, the line
 * "COMMITTED i" or "ABORTED i" with the producer id and epoch the client holds after it, and first
 * "TV2 true|false": whether the client runs transactions v2 (it reads the broker's finalized
 * transaction.version). Arguments: BOOTSTRAP TOPIC PARTITIONS TRANSACTIONS GROUP TRANSACTIONAL_ID.
 */
public final class TxnV2 {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[4], transactionalId = args[5];
        int partitions = Integer.parseInt(args[2]), transactions = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            System.out.println("TV2 " + transactionManager(producer).getClass()
                    .getMethod("isTransactionV2Enabled").invoke(transactionManager(producer)));
            for (int i = 0; i < transactions; i++) {
                producer.beginTransaction();
                for (int p = 0; p < partitions; p++) {
                    producer.send(new ProducerRecord<>(topic, p, "k", "txn" + i + "-p" + p));
                }
                producer.sendOffsetsToTransaction(
                        Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(i + 1)),
                        new ConsumerGroupMetadata(group));
                producer.flush();
                boolean abort = i % 3 == 2;
                if (abort) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
                System.out.println((abort ? "ABORTED " : "COMMITTED ") + i + " " + producerIdAndEpoch(producer));
                System.out.flush();
            }
        }
        System.out.println("DONE");
    }

    private static Object transactionManager(KafkaProducer<?, ?> producer) throws ReflectiveOperationException {
        Field field = KafkaProducer.class.getDeclaredField("transactionManager");
        field.setAccessible(true);
        return field.get(producer);
    }

    private static String producerIdAndEpoch(KafkaProducer<?, ?> producer) throws ReflectiveOperationException {
        Object manager = transactionManager(producer);
        Field field = manager.getClass().getDeclaredField("producerIdAndEpoch");
        field.setAccessible(true);
        Object value = field.get(manager);
        Field id = value.getClass().getDeclaredField("producerId");
        Field epoch = value.getClass().getDeclaredField("epoch");
        id.setAccessible(true);
        epoch.setAccessible(true);
        return id.get(value) + " " + epoch.get(value);
    }
}
