// Package e2e drives a built `sqlkube server` with the real kubectl binaries
// of the machine (kubectl, and kubectl.1.27 ... kubectl.1.33 beside the real
// file behind it when present).
package e2e
