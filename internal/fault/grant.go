package fault

// NotGranted: a tenant of pinfold serve asked for what the operator's
// policy does not grant (HTTP 403).
const NotGranted Code = "PF189"

// E2BUnsupported: a call of E2B's protocol that pinfold serve does not
// serve (docs/e2b.md), answered in E2B's error shape.
const E2BUnsupported Code = "PF158"
