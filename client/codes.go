package client

// The PF codes (docs/errors.md) of the errors a caller of the API is
// likely to branch on, and of those the client makes itself. They are
// pinfold's codes, spelled here because this package imports nothing of
// pinfold's internals; internal/fault's tests check that they are equal.
const (
	CodeUsage           = "PF101" // a command line that does not parse
	CodeBadValue        = "PF102" // a value that does not parse
	CodeRuntimeLacks    = "PF143" // the backend cannot enforce what is asked
	CodeNotFound        = "PF150" // the command is not in the sandbox
	CodeCannotExec      = "PF151" // the command cannot be executed
	CodeNoChangeset     = "PF180" // the sandbox has no changeset
	CodeConflict        = "PF181" // originals changed since the run
	CodeBusy            = "PF183" // the changeset is in use
	CodePolicyChange    = "PF186" // the changeset changes a pinfold.yaml
	CodeNotGranted      = "PF189" // the server's policy does not grant it
	CodeSandboxNotFound = "PF190" // no sandbox of that id
	CodeRefused         = "PF191" // a sandbox cannot be started or asked
	CodeEnded           = "PF192" // the sandbox is not running
	CodeUnauthorized    = "PF193" // the server refused the credentials
	CodeAPI             = "PF194" // the server cannot be reached or failed
)
