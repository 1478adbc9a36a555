package fault

// NotGranted: a tenant of pinfold serve asked for what the operator's
// policy does not grant (HTTP 403).
const NotGranted Code = "PF189"
