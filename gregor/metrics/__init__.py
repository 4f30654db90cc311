"""A node's metrics in Kafka's names, as the Prometheus JMX exporter's common rules render them
(names.py), read at scrape time (collectors.py) from counters the hot paths bump (stats.py), and
the readiness decision (health.py). Sans-I/O: the HTTP listener is a driver
(runtime/metrics_listener.py), wired in broker/node_metrics.py. Served when `metrics.listener`
is set (`gregor serve --metrics HOST:PORT`), on every node: a controller-only node serves the
controller's, Raft's, its listener's and the process's (it has no partitions or groups), and
is ready once it knows the quorum's leader and the committed metadata.

Broker topic metrics (counters; `{topic}`, and the all-topics series without a label):
    kafka_server_brokertopicmetrics_messagesin_total       records appended by clients
    kafka_server_brokertopicmetrics_bytesin_total          their batch bytes
    kafka_server_brokertopicmetrics_bytesout_total         record bytes sent to consumers
    kafka_server_brokertopicmetrics_totalproducerequests_total, _failedproducerequests_total
    kafka_server_brokertopicmetrics_totalfetchrequests_total, _failedfetchrequests_total
        (per partition of a request, as Kafka counts them)
Requests (runtime/request_metrics.py says what each time covers):
    kafka_network_requestmetrics_requests_total{request,version}
    kafka_network_requestmetrics_{totaltimems,requestqueuetimems,localtimems,remotetimems,
    responsequeuetimems,responsesendtimems}{request} histograms, ms, of one request in 8
Replica manager (partitions hosted here):
    kafka_server_replicamanager_{underreplicatedpartitions,underminisrpartitioncount,
    offlinereplicacount,leadercount,partitioncount}; _isrshrinks_total, _isrexpands_total
Fetch sessions (KIP-227): kafka_server_fetchsessioncache_{numincrementalfetchsessions,
    numincrementalfetchpartitionscached}; _incrementalfetchsessionevictions_total
Controller (from this node's metadata image; activecontrollercount 1 on the active one):
    kafka_controller_kafkacontroller_{activecontrollercount,offlinepartitionscount,
    globaltopiccount,globalpartitioncount,activebrokercount,fencedbrokercount}
Raft (the metadata quorum as this node sees it):
    kafka_server_raft_metrics_{current_leader,current_epoch,high_watermark,log_end_offset,
    commit_latency_avg,commit_latency_max} (latency: ms, last 64 commits appended here)
Log (per hosted partition, `{topic,partition}`):
    kafka_log_log_{size,numlogsegments,logstartoffset,logendoffset}
Group coordinator (groups this node coordinates):
    kafka_server_group_coordinator_metrics_group_count{protocol,state},
    _classic_group_completed_rebalance_count, _offset_commit_count
Consumer-group lag (as kafka-lag-exporter; high watermark of a partition hosted here minus
the committed offset): kafka_consumergroup_group_{offset,lag}{group,topic,partition},
    kafka_consumergroup_group_{max_lag,sum_lag}{group}
Network: kafka_server_socket_server_metrics_connection_count{listener},
    _connection_accept_throttle_time{listener} (ms, the average delay of connections accepted
    over max.connection.creation.rate, KIP-612), _ip_connection_accept_throttle_time{listener}
    (ms before closing connections over an address's connection_creation_rate),
    _connection_accept_rate{listener} and {ip} (connections accepted per second over the quota
    window; `ip`: addresses under a connection_creation_rate), _broker_connection_accept_rate
    (over the listeners max.connection.creation.rate binds), _connection_creation_total,
    _connection_close_total, _connection_creation_rate, _connection_close_rate {listener}
    (per second over 30-60 s), _incoming_byte_total, _outgoing_byte_total;
    kafka_network_acceptor_acceptorblockedpercent_total{listener} (ns the listener held
    accepted connections back for a creation rate, all told: the meter's count)
Process: prometheus_client's process_* (CPU seconds, resident memory, open fds...), and
    gregor_event_loop_lag_seconds, gregor_event_loop_lag_max_seconds
"""
