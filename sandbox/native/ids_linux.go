package native

import (
	"strconv"
	"strings"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/tarentry"
)

// When pinfold runs as root, sandbox ids 0..65535 map to this unprivileged
// host range, so the sandbox never holds host root: the shift the store
// unpacks bases with.
const (
	hostIDBase = store.RootIDBase
	hostIDSize = tarentry.ShiftedIDs // what the store extracts bases for
)

// idPlan is how ids map between the sandbox and the host.
type idPlan struct {
	uidMap, gidMap     string
	setgroupsDeny      bool
	initID             *initp.ID
	user               initp.ID
	idmap              bool   // binds need idmapped mounts
	idmapUID, idmapGID string // a separate idmap, when the sandbox's own won't do
}

// planIDs decides the id maps. Unprivileged users map their own ids (to
// root inside with Spec.Root). Root maps an unprivileged range and shows
// the workspace through an idmapped mount, so that files the command
// creates belong to the workspace's owner on disk.
func planIDs(euid, egid int, root bool, owner *initp.ID) idPlan {
	if euid != 0 {
		in := initp.ID{UID: uint32(euid), GID: uint32(egid)}
		if root {
			in = initp.ID{}
		}
		return idPlan{
			uidMap:        mapLine(in.UID, uint32(euid), 1),
			gidMap:        mapLine(in.GID, uint32(egid), 1),
			setgroupsDeny: true,
			user:          in,
		}
	}
	p := idPlan{
		uidMap: mapLine(0, hostIDBase, hostIDSize),
		gidMap: mapLine(0, hostIDBase, hostIDSize),
		initID: &initp.ID{},
		user:   initp.ID{},
		idmap:  true,
	}
	if owner != nil && (owner.UID != p.user.UID || owner.GID != p.user.GID) {
		p.idmapUID = swapMap(owner.UID, p.user.UID)
		p.idmapGID = swapMap(owner.GID, p.user.GID)
	}
	return p
}

func mapLine(inside, outside, n uint32) string {
	return strconv.FormatUint(uint64(inside), 10) + " " + strconv.FormatUint(uint64(outside), 10) + " " +
		strconv.FormatUint(uint64(n), 10) + "\n"
}

// swapMap is an idmap in which disk id owner shows as sandbox id user (and
// user as owner); every other id shows as itself. An idmapped mount reads
// disk id d as id d of this namespace, i.e. host id map(d), which the
// sandbox then sees through its own map (inside i = host hostIDBase+i).
func swapMap(owner, user uint32) string {
	var b strings.Builder
	if owner == user {
		b.WriteString(mapLine(0, hostIDBase, hostIDSize))
		return b.String()
	}
	// Identity over [0, size) except the two swapped ids.
	var holes []uint32
	if owner < hostIDSize {
		holes = append(holes, owner)
	}
	holes = append(holes, user)
	if len(holes) == 2 && holes[0] > holes[1] {
		holes[0], holes[1] = holes[1], holes[0]
	}
	next := uint32(0)
	for _, h := range holes {
		if h > next {
			b.WriteString(mapLine(next, hostIDBase+next, h-next))
		}
		next = h + 1
	}
	if next < hostIDSize {
		b.WriteString(mapLine(next, hostIDBase+next, hostIDSize-next))
	}
	b.WriteString(mapLine(owner, hostIDBase+user, 1))
	if owner < hostIDSize {
		b.WriteString(mapLine(user, hostIDBase+owner, 1))
	}
	return b.String()
}
