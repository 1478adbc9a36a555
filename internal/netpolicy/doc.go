// Package netpolicy is the network of a sandbox that is neither cut off
// nor sharing the host's: a userspace TCP/IP stack that terminates the
// sandbox's TUN device, pinfold's DNS server, and the policy that decides
// which names resolve and which connections go out from the host's own
// sockets. Because every packet ends here, the policy holds for programs
// that ignore proxy variables and for raw addresses alike.
package netpolicy
