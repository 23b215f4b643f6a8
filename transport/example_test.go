package transport_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/raftpace/raftpace/transport"
)

func ExampleTransport_Call() {
	const methodUpper uint8 = 1
	server, err := transport.New(transport.Config{
		BindAddr: "127.0.0.1:0",
		Handler: func(ctx context.Context, method uint8, req []byte) ([]byte, error) {
			if method != methodUpper {
				return nil, fmt.Errorf("unknown method %d", method)
			}
			return []byte(strings.ToUpper(string(req))), nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer server.Close()

	// Every transport serves and calls; this one only calls.
	client, err := transport.New(transport.Config{
		BindAddr: "127.0.0.1:0",
		Handler: func(context.Context, uint8, []byte) ([]byte, error) {
			return nil, fmt.Errorf("no methods")
		},
	})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	resp, err := client.Call(ctx, server.Addr().String(), methodUpper, []byte("hello"))
	fmt.Println(string(resp), err)

	_, err = client.Call(ctx, server.Addr().String(), 9, nil)
	fmt.Println(err)
	// Output:
	// HELLO <nil>
	// transport: remote: unknown method 9
}
