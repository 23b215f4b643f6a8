package dataplane_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/raftpace/raftpace/agent/dataplane"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/nodetest"
)

// BenchmarkSocketReserve measures what the agent's side of a socket
// reservation costs: a real single-node cluster behind the data plane on
// a unix socket, served by net/http as the agent serves it, and callers
// that do the least a client can (one prebuilt request on a kept-alive
// connection, the answer read to its Content-Length). With -cpuprofile it
// shows where the agent's CPU goes; the Python figures are
// clients/python/bench.py's.
func BenchmarkSocketReserve(b *testing.B) {
	c := nodetest.New(b, 1)
	n := c.Node(0)
	const key = "bench"
	if err := n.SetLimit(nodetest.Ctx(b, 10*time.Second), key, fsm.Limit{Rate: 1e6, Burst: 1000}); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: dataplane.NewHandler(n), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	body := `{"n":1,"max_wait":1}`
	req := []byte(fmt.Sprintf("POST /v1/reserve/%s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body))
	b.SetParallelism(2)
	b.ResetTimer()
	begin := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		for pb.Next() {
			if _, err := conn.Write(req); err != nil {
				b.Error(err)
				return
			}
			if err := readAnswer(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(begin).Seconds(), "reservations/s")
}

// readAnswer reads one 200 answer to its Content-Length.
func readAnswer(r *bufio.Reader) error {
	status, err := r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(status, []byte("HTTP/1.1 200")) {
		return fmt.Errorf("answer %q", status)
	}
	length := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(bytes.ToLower(line), []byte("content-length:")); ok {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if length < 0 {
		return fmt.Errorf("answer without Content-Length")
	}
	_, err = r.Discard(length)
	if err == io.EOF {
		err = nil
	}
	return err
}
