package handlers

import (
	"bytes"
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// watchWebsocket serves a watch over a websocket, as kube-apiserver does
// for requests that ask to upgrade: each event is one message holding a
// metav1.WatchEvent, a text message in JSON, a binary one in protobuf.
// The stream ends as a chunked one does, and also when the client closes
// the socket. Any Origin (or none) is accepted: the client was already
// authenticated by its certificate.
func (h *Request) watchWebsocket(ctx context.Context, w watch.Interface, enc watchEncoding) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	text := enc.info.EncodesAsText
	serve := func(ws *websocket.Conn) {
		// Messages from the client are ignored; reading them notices
		// when it closes the socket.
		go func() {
			defer cancel()
			var ignored []byte
			for websocket.Message.Receive(ws, &ignored) == nil {
			}
		}()
		var buf bytes.Buffer
		_ = h.streamEvents(ctx, w, enc, func(ev *metav1.WatchEvent) error {
			buf.Reset()
			if err := enc.info.StreamSerializer.Serializer.Encode(ev, &buf); err != nil {
				return err
			}
			if text {
				return websocket.Message.Send(ws, buf.String())
			}
			return websocket.Message.Send(ws, buf.Bytes())
		})
	}
	h.Echo.Response().Header().Set(echo.HeaderContentType, enc.info.MediaType)
	srv := websocket.Server{Handler: serve, Handshake: func(*websocket.Config, *http.Request) error { return nil }}
	srv.ServeHTTP(h.Echo.Response(), h.Echo.Request())
	return nil
}
