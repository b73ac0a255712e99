package platform

// PolkitAction is the polkit action that guards a person's approval
// (settings.approvalAuthentication); the project ships its definition as
// assets/polkit/dev.portcullis.approve.policy, to be installed in
// /usr/share/polkit-1/actions/.
const PolkitAction = "dev.portcullis.approve"

// polkitReasonKey is the detail pkcheck passes with each check: what is
// being approved, shown by the authentication agent in the action's
// message ($(portcullis.reason)).
const polkitReasonKey = "portcullis.reason"
