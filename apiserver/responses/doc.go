// Package responses writes the API server's answers: objects in the
// encoding the client negotiated (JSON, YAML, protobuf; as a Table or as
// PartialObjectMetadata when asked), and errors as metav1.Status.
package responses
