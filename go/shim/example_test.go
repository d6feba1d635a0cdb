package shim_test

import (
	"context"
	"fmt"
	"os"

	"stepshim.dev/go/shim"
)

func Example() {
	client, _ := shim.New("http://10.0.0.7:7777", os.Getenv("STEPSHIM_TOKEN"))
	ctx := context.Background()
	// An id of the caller's choosing: running it again after a lost answer finds the same process.
	if _, err := client.Run(ctx, "build-1", shim.Spec{Path: "make", Args: []string{"test"}}); err != nil {
		panic(err) // errors.Is(err, shim.ErrExecutableNotFound) if make is missing
	}
	// Every byte of output once, in order, across broken connections, then the exit.
	exit, err := client.Follow(ctx, "build-1", 0, func(f shim.Frame) error {
		var err error
		switch f.Type {
		case shim.FrameStdout:
			_, err = os.Stdout.Write(f.Payload)
		case shim.FrameStderr:
			_, err = os.Stderr.Write(f.Payload)
		}
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("exit status", exit.Status)
}
