// Package kubehelper is the Kubernetes helper pinfold-kube: it holds
// client-go, so that pinfold itself does not link it (a plain pinfold run
// starts without Kubernetes' packages). pinfold starts it for each command
// run with --backend kubernetes; see internal/kube for the protocol and
// sandbox/kubernetes for the runtime. It is not run by hand, except
//
//	pinfold-kube check       can the cluster be reached and used
//	pinfold-kube leftovers   objects of pinfold processes that are gone
//	pinfold-kube clean       remove them (pinfold clean runs it)
//	pinfold-kube pool NAME SIZE SOCKET
//	                         keep SIZE warm pods of every session template
//	                         it is told of on SOCKET (pinfold serve
//	                         --kube-pool starts it), until stdin ends
//	pinfold-kube exec POD -- ARGS...
//	                         run ARGS in the pod's main container, as a
//	                         session's command would be (for benchmarks)
package kubehelper

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// Main runs the helper with os.Args and returns its exit code.
func Main() int {
	// client-go logs through klog to stderr, which is the command's.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pinfold-kube run|check|leftovers|clean (pinfold starts it; see sandbox/kubernetes)")
		return 2
	}
	switch os.Args[1] {
	case "run":
		return run()
	case "check":
		return check()
	case "leftovers":
		return leftovers(false)
	case "clean":
		return leftovers(true)
	case "pool":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
		return pool(os.Args[2:], term)
	case "exec":
		return execCmd(os.Args[2:])
	}
	fmt.Fprintln(os.Stderr, "pinfold-kube: unknown command "+os.Args[1])
	return 2
}
