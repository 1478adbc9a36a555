package doctor

// The checks of what pinfold runs besides itself: signature checks
// (skopeo), pinfold-net, pinfold-pack, and squashfuse for apps.

import (
	"os"
	"os/exec"

	"github.com/pinfold/pinfold/internal/appmount"
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/trust"
)

// signaturesCheck says whether registry images' signatures can be
// verified (verify_signature): the crypto works, and skopeo is there to
// read signatures from registries.
func signaturesCheck() Check {
	c := Check{ID: "signatures", Title: "image signature verification"}
	if err := trust.SelfTest(); err != nil {
		c.Status, c.Detail = Fail, "the self-test failed: "+err.Error()
		c.Fix = "please report this"
		return c
	}
	tool, err := exec.LookPath("skopeo")
	if err != nil {
		c.Status, c.Detail = Warn, "skopeo is not installed: verify_signature cannot read signatures from registries"
		c.Fix = "apt-get install skopeo"
		return c
	}
	c.Status, c.Detail = Pass, "cosign signatures checked offline against trusted keys; registries read with "+tool
	return c
}

// netHelperCheck finds pinfold-net, which serves the network modes
// outbound and allow and published ports, and checks that it starts.
func netHelperCheck() Check {
	c := Check{ID: "network.helper", Title: "network helper (pinfold-net)"}
	path, err := netpolicy.HelperPath()
	if err != nil {
		c.Status, c.Detail = Warn, "not found: --network outbound and allow, and published ports, cannot run"
		c.Fix = "install pinfold-net beside pinfold (scripts/setup.sh does), or set PINFOLD_NET_HELPER to its path"
		return c
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		c.Status, c.Detail = Warn, path+" is not an executable file"
		c.Fix = "install pinfold-net beside pinfold (scripts/setup.sh does), or set PINFOLD_NET_HELPER to its path"
		return c
	}
	c.Status, c.Detail = Pass, path
	return c
}

// packHelperCheck says whether pinfold pack can write images.
func packHelperCheck() Check {
	c := Check{ID: "pack.helper", Title: "image writer (pinfold-pack)"}
	fix := "install pinfold-pack beside pinfold (scripts/setup.sh --all does), or set PINFOLD_PACK_HELPER to its path"
	path, err := pack.HelperPath()
	if err != nil {
		c.Status, c.Detail, c.Fix = Warn, "not found: pinfold pack cannot write images (running apps needs no helper)", fix
		return c
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		c.Status, c.Detail, c.Fix = Warn, path+" is not an executable file", fix
		return c
	}
	c.Status, c.Detail = Pass, path
	return c
}

// appMountCheck says how runs of apps start here: their root image mounted
// through squashfuse inside the sandbox, or their layers unpacked into the
// store on the first run (docs/pack.md, "How it starts").
func appMountCheck() Check {
	c := Check{ID: "app.mount", Title: "app start (mount or unpack)"}
	mode, why := appmount.Mode()
	note := "; pack app adds the root image with sqfstar"
	if _, err := exec.LookPath("sqfstar"); err != nil {
		note = "; sqfstar is not installed, so pack app writes apps without a root image (they are unpacked wherever they run)"
	}
	if mode == "mount" {
		c.Status, c.Detail = Pass, "apps are mounted: "+why+note
		return c
	}
	if os.Geteuid() != 0 && os.Getenv(appmount.Env) != "0" {
		// What a user's runs do: nothing to fix.
		c.Status, c.Detail = Pass, "apps are unpacked into the store on their first run (mounting them needs root)"+note
		return c
	}
	c.Status, c.Detail = Warn, "apps are unpacked into the store on their first run: "+why+note
	c.Fix = "install squashfuse (apt-get install squashfuse), or unset " + appmount.Env
	return c
}
