package platform

// PolkitAction is the polkit action that guards a person's approval
// (settings.approvalAuthentication); the project ships its definition as
// assets/polkit/dev.portcullis.approve.policy, to be installed in
// /usr/share/polkit-1/actions/.
const PolkitAction = "dev.portcullis.approve"
