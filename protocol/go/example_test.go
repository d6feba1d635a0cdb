package shim_test

import (
	"context"
	"fmt"
	"os"

	shim "stepshim.dev/protocol/go"
)

func Example() {
	client, _ := shim.New("http://10.0.0.7:7777", os.Getenv("STEPSHIM_TOKEN"))
	c := shim.NewContainer(client)
	ctx := context.Background()
	p, err := c.Run(ctx, shim.ProcessSpec{ID: "build-1", Path: "make", Args: []string{"test"}},
		shim.ProcessIO{Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		panic(err) // errors.Is(err, shim.ErrExecutableNotFound) if make is missing
	}
	status, err := p.Wait(ctx) // after the exit frame and all output
	fmt.Println("exit status", status, err)
}
