package remote

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"

	"github.com/vstellar/vstellar/fabric"
)

// identLabel separates this use of the cluster secret from any other.
const identLabel = "vstellar rc connection v1"

// identity is ConnIdentity; a test forces a collision through it.
var identity = ConnIdentity

// ConnIdentity derives the connection id and token that the receiving
// end of direction from -> to (the QP at to) expects in every packet of
// that direction: HMAC-SHA256 keyed with the cluster secret over the
// tenant and both QP addresses. Both hosts compute it from the QP
// attributes alone, so no handshake is needed; a QP pair's receive side
// uses ConnIdentity(secret, tenant, remote, local) and its send side
// ConnIdentity(secret, tenant, local, remote).
func ConnIdentity(secret []byte, tenant uint32, from, to fabric.Addr) (id uint32, token uint64) {
	var b [len(identLabel) + 4 + 2*(16+4)]byte
	n := copy(b[:], identLabel)
	binary.BigEndian.PutUint32(b[n:], tenant)
	n += 4
	n += copy(b[n:], from.GID[:])
	binary.BigEndian.PutUint32(b[n:], from.QPN)
	n += 4
	n += copy(b[n:], to.GID[:])
	binary.BigEndian.PutUint32(b[n:], to.QPN)
	mac := hmac.New(sha256.New, secret)
	mac.Write(b[:])
	var sum [sha256.Size]byte
	s := mac.Sum(sum[:0])
	return binary.BigEndian.Uint32(s[0:]), binary.BigEndian.Uint64(s[4:])
}
