// Package metrics exports the events of a fedcalib coordinator or client
// (network.Observer, network.ClientObserver) as Prometheus metrics, and
// serves them over HTTP with the health endpoints operators expect:
//
//	/metrics  the metrics, in Prometheus's text format
//	/healthz  200 while the process serves HTTP: it is alive
//	/readyz   200 once the process is connected to NATS and, for a
//	          coordinator, has opened its store, read its checkpoint and
//	          listens for enrolments; 503 otherwise (before, or while
//	          NATS is disconnected)
//
// Every metric is named fedcalib_coordinator_* or fedcalib_client_*;
// docs/NETWORK.md lists them. Counters count what this process saw: a
// coordinator restarted on its store starts them again from zero, while
// its round and privacy gauges are read from the store.
package metrics
