package netpolicy
const maxDNSInFlight = 256
