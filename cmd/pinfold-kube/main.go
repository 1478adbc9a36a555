// Command pinfold-kube is pinfold's Kubernetes helper: pinfold starts it
// for each command run with --backend kubernetes. It holds client-go, which
// pinfold itself does not link. See internal/kubehelper.
package main

import (
	"os"

	"github.com/pinfold/pinfold/internal/kubehelper"
)

func main() { os.Exit(kubehelper.Main()) }
