"""Kafka for every hifi component: settings, clients that raise only hifi errors, topic admin.

- `settings`: where the brokers are and how to reach them (`KafkaSettings`, from the
  environment); light: the CLIs' `--help` reads it without loading aiokafka;
- `clients`: the one place aiokafka errors are translated (`kafka_errors`), shared options;
- `producing`, `consuming`: the producer (`open_producer`) and the consumer (`open_consumer`);
- `reading`: a topic read to its end, records at given offsets, committed offsets;
- `admin`, `admin_client`: topics created, described and configured; a group left;
- `reach`: whether Kafka answers a daemon, and how its clients wait while it does not;
- `probe`: what a bootstrap address answers (TCP, TLS, ApiVersions, SASL);
- `security`, `oauthbearer`: TLS and SASL for the clients.

Import from the module that defines a name (`from hifi.kafka.producing import open_producer`).
"""
