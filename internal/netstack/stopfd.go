package netstack

import (
	"reflect"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// stopFDs finds the eventfds fdbased made to stop the device's readers
// (one per reader, its StopFD), which it never closes: a shared helper
// kept one descriptor for every sandbox it had served. The endpoint does
// not export them, so they are read with reflection (reading an
// unexported field is allowed; nothing is written); a gVisor whose
// endpoint is laid out otherwise gives none, and
// TestCloseLeavesNoDescriptors fails.
func stopFDs(link stack.LinkEndpoint) []int {
	v := reflect.ValueOf(link)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	ds := v.Elem().FieldByName("inboundDispatchers")
	if !ds.IsValid() || ds.Kind() != reflect.Slice {
		return nil
	}
	var fds []int
	for i := range ds.Len() {
		d := ds.Index(i)
		for d.Kind() == reflect.Interface || d.Kind() == reflect.Pointer {
			if d.IsNil() {
				break
			}
			d = d.Elem()
		}
		if d.Kind() != reflect.Struct {
			continue
		}
		sf := d.FieldByName("StopFD")
		if !sf.IsValid() || sf.Kind() != reflect.Struct {
			continue
		}
		if efd := sf.FieldByName("EFD"); efd.IsValid() && efd.CanInt() && efd.Int() >= 0 {
			fds = append(fds, int(efd.Int()))
		}
	}
	return fds
}
