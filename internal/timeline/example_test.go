package timeline_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

func Example() {
	dir, err := os.MkdirTemp("", "timeline")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Each process records what its node admitted. Here two nodes each
	// pace themselves at 10/s with burst 1, without coordinating.
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var paths []string
	for _, node := range []string{"n1", "n2"} {
		path := filepath.Join(dir, node+".timeline")
		w, err := timeline.NewWriter(path, node)
		if err != nil {
			log.Fatal(err)
		}
		for i := range 21 {
			if err := w.Record("acme", start.Add(time.Duration(i)*100*time.Millisecond)); err != nil {
				log.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			log.Fatal(err)
		}
		paths = append(paths, path)
	}

	// The checker merges the timelines and checks the global limit.
	events, err := timeline.ParseFiles(paths...)
	if err != nil {
		log.Fatal(err)
	}
	rep := timeline.Check(events, "acme", timeline.Spec{
		Limit:   timeline.Limit{Rate: 10, Burst: 1},
		Windows: []time.Duration{250 * time.Millisecond, 1050 * time.Millisecond},
		Delta:   time.Millisecond,
	})
	fmt.Println(rep.OK())
	fmt.Println(rep)
	// Output:
	// false
	// key=acme events=42 rate=20.50/s (205.0% of 10) nodes: n1=21 n2=21
	//   spread: longest gap n1=100ms n2=100ms; 0 of 2 s with a node under half an even share
	//   W=250ms max=6 bound=3.51 OVER at 2025-01-01T00:00:00Z (+0s)
	//   W=1.05s max=22 bound=11.51 OVER at 2025-01-01T00:00:00Z (+0s)
}
