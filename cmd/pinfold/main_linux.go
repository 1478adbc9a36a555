package main

import (
	"context"
	"os"

	"github.com/pinfold/pinfold/internal/cli"
)

func run(args []string) int {
	return cli.Main(context.Background(), &cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, args)
}
