// Package mixin holds the kubernetes-mixin's control-plane rules as
// kube-prometheus renders them and kube-prometheus-stack installs them
// (README.md says where they come from and how to refresh them;
// NEEDS.md, what a Prometheus must scrape for them to have data). Its
// test checks that the file loads and has the groups sqlkube's tests
// rely on.
package mixin

import _ "embed"

// Rules is kubernetes-control-plane.rules.yaml: a Prometheus rule file
// (groups at top level) of recording rules and alerts.
//
//go:embed kubernetes-control-plane.rules.yaml
var Rules []byte
