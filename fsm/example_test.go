package fsm_test

import (
	"fmt"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

func Example() {
	// The leader encodes a command; the bytes travel through raft.
	b, err := fsm.Encode(fsm.SetLimit{Key: "google-images", Limit: fsm.Limit{Rate: 10, Burst: 5}})
	if err != nil {
		panic(err)
	}

	// Every replica decodes the committed entry and applies it at its index.
	state := fsm.New()
	c, err := fsm.Decode(b)
	if err != nil {
		panic(err)
	}
	if err := state.Apply(1, c); err != nil {
		panic(err)
	}
	h, _ := fsm.Encode(fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "google-images", Ahead: 2 * time.Second}}})
	c, _ = fsm.Decode(h)
	if err := state.Apply(2, c); err != nil {
		panic(err)
	}

	l, _ := state.Limit("google-images")
	ahead, _ := state.Horizon("google-images")
	fmt.Println(l.Rate, l.Burst, l.Interval(), ahead, state.AppliedIndex())
	// Output: 10 5 100ms 2s 2
}

func ExampleLimit_Validate() {
	err := fsm.Limit{Rate: 0, Burst: 0}.Validate()
	fmt.Println(err)
	// Output:
	// fsm: invalid limit: Rate 0: must be > 0
	// fsm: invalid limit: Burst 0: must be >= 1
}

func ExampleLimit_Interval() {
	fmt.Println(fsm.Limit{Rate: 3, Burst: 1}.Interval())
	fmt.Println(fsm.Limit{Rate: 7, Burst: 1}.Interval())
	// Output:
	// 333.333334ms
	// 142.857143ms
}

func ExampleValidateKey() {
	fmt.Println(fsm.ValidateKey("provider:acme/cred:42"))
	fmt.Println(fsm.ValidateKey("acme cred"))
	// Output:
	// <nil>
	// fsm: invalid key "acme cred": contains whitespace U+0020 at byte 4
}
