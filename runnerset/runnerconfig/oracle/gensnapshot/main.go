// Command gensnapshot writes runnerset/runnerconfig/oracle/snapshot.json:
// the config.toml schema and the feature flags of the gitlab-runner
// version the oracle pins, read from its module source, for the
// controller to judge a RunnerSet's job settings without that source.
//
//	go run ./runnerset/runnerconfig/oracle/gensnapshot runnerset/runnerconfig/oracle/snapshot.json
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gensnapshot <output file>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(out string) error {
	s, err := oracle.Load(context.Background())
	if err != nil {
		return err
	}
	sn, err := s.LoadSnapshot()
	if err != nil {
		return err
	}
	b, err := sn.Encode()
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
