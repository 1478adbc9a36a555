package fault_test

import (
	"testing"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/fault"
)

// TestClientCodes: the public client package spells the codes it shares
// with pinfold itself; they must be pinfold's.
func TestClientCodes(t *testing.T) {
	for _, c := range []struct {
		client string
		fault  fault.Code
	}{
		{client.CodeUsage, fault.Usage},
		{client.CodeBadValue, fault.BadValue},
		{client.CodeRuntimeLacks, fault.RuntimeLacks},
		{client.CodeNotFound, fault.NotFound},
		{client.CodeCannotExec, fault.CannotExec},
		{client.CodeNoChangeset, fault.NoChangeset},
		{client.CodeConflict, fault.Conflict},
		{client.CodeBusy, fault.Busy},
		{client.CodePolicyChange, fault.PolicyChange},
		{client.CodeNotGranted, fault.NotGranted},
		{client.CodeSandboxNotFound, fault.SessionNotFound},
		{client.CodeRefused, fault.SessionRefused},
		{client.CodeEnded, fault.SessionEnded},
		{client.CodeUnauthorized, fault.APIAuth},
		{client.CodeAPI, fault.API},
	} {
		if c.client != string(c.fault) {
			t.Errorf("client has %s where pinfold has %s", c.client, c.fault)
		}
	}
}
