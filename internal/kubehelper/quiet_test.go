package kubehelper

import (
	"errors"
	"io"
	"os"
	"testing"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// client-go's errors, such as the one it logs when a command's stdout
// reader went away, must not reach the helper's stderr (the command's).
func TestQuietKeepsClientGoOffStderr(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	quiet()
	utilruntime.HandleErrorWithLogger(klog.Background(), errors.New("write /dev/stdout: broken pipe"), "Copying stdout failed")
	klog.Errorf("an error of klog's own")
	klog.Flush()
	os.Stderr = stderr
	w.Close()
	b, _ := io.ReadAll(r)
	if len(b) > 0 {
		t.Errorf("client-go's log reached stderr: %q", b)
	}
}
