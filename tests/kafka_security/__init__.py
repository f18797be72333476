"""Secured Kafka end to end: TLS (one-way and mutual) through stunnel in front of Tansu, SASL
against Tansu's --authentication, and the one-line errors of a set-up that cannot work."""
