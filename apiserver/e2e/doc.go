// Package e2e drives a built `sqlkube server` with the real kubectl binaries
// of the machine (kubectl, and kubectl.1.27 ... kubectl.1.33 beside the real
// file behind it when present), and with client-go where assertions are
// easier: the scheduler's acceptance tests (TestScheduler_*) run it against
// simulated nodes of their own (`sqlkube node --fake` processes).
package e2e
