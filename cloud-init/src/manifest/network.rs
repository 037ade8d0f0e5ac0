//! Who reaches a lab VM: the NetworkPolicy (the backend alone reaches the
//! agent's port; a session's VMs reach each other on every other port) and
//! a session's headless Service (what makes its VMs' names resolve).

use super::{Channel, ManifestSpec, SESSION_LABEL};
use crate::yaml::{Node, field, text};
use lab_agent_proto::guest::PORT;

/// The policy selecting the render's VMs (`lab-agent/session=NAME`).
///
/// Ingress only: the backend's pods reach TCP 8899 when the agent listens
/// there; in a session the VMs reach each other on every TCP port but
/// 8899 and every UDP port. Policies add up (a connection passes when any
/// policy selecting the pod allows it), so the peers' rule lists the ports
/// around 8899 rather than "all but": ICMP and port-less protocols
/// (IP-in-IP) do not pass between the VMs. With `--channel vsock` there is
/// no rule for the backend: nothing listens.
pub(super) fn policy(spec: &ManifestSpec, session: bool) -> Node {
    let selector = || {
        Node::map([field(
            "matchLabels",
            Node::map([text(SESSION_LABEL, spec.name.as_str())]),
        )])
    };
    let mut rules = Vec::new();
    if spec.channel != Channel::Vsock {
        let backend = &spec.backend;
        let mut peer = Vec::new();
        if let Some(ns) = &backend.namespace {
            peer.push(field(
                "namespaceSelector",
                Node::map([field(
                    "matchLabels",
                    Node::map([text("kubernetes.io/metadata.name", ns.as_str())]),
                )]),
            ));
        }
        if !backend.labels.is_empty() {
            peer.push(field(
                "podSelector",
                Node::map([field("matchLabels", Node::strings(&backend.labels))]),
            ));
        }
        rules.push(Node::map([
            field("from", Node::list([Node::Map(peer)]))
                .comment("The backend: the agent's port only."),
            field("ports", Node::list([port("TCP", PORT, None)])),
        ]));
    }
    if session {
        rules.push(Node::map([
            field(
                "from",
                Node::list([Node::map([field("podSelector", selector())])]),
            )
            .comment("The session's VMs, from each other: every port but the agent's."),
            field(
                "ports",
                Node::list([
                    port("TCP", 1, Some(PORT - 1)),
                    port("TCP", PORT + 1, Some(u16::MAX)),
                    port("UDP", 1, Some(u16::MAX)),
                ]),
            ),
        ]));
    }
    let ingress = field("ingress", Node::List(rules));
    let ingress = if spec.channel == Channel::Vsock && !session {
        ingress
            .comment("None: the agent listens on vsock alone, and nothing else may reach the VM.")
    } else {
        ingress
    };
    Node::map([
        field("apiVersion", Node::Plain("networking.k8s.io/v1")),
        field("kind", Node::Plain("NetworkPolicy")),
        field("metadata", metadata(spec)),
        field(
            "spec",
            Node::map([
                field("podSelector", selector()),
                field("policyTypes", Node::list([Node::Plain("Ingress")])),
                ingress,
            ]),
        ),
    ])
}

/// The session's headless Service: named like the VMs' `subdomain`,
/// selecting their pods, no cluster IP and no ports (it exists for its DNS
/// records). `publishNotReadyAddresses`: a name resolves once the VM's pod
/// has an address, as a VM's setup may wait for the others by name.
pub(super) fn service(spec: &ManifestSpec) -> Node {
    Node::map([
        field("apiVersion", Node::Plain("v1")),
        field("kind", Node::Plain("Service")),
        field("metadata", metadata(spec)),
        field(
            "spec",
            Node::map([
                field("clusterIP", "None").comment(
                    "Headless: `HOSTNAME.SUBDOMAIN.NAMESPACE.svc.CLUSTER_DOMAIN` is each VM's\n\
                     address, the VMs' `subdomain` being this Service's name.",
                ),
                field("publishNotReadyAddresses", true),
                field(
                    "selector",
                    Node::map([text(SESSION_LABEL, spec.name.as_str())]),
                ),
            ]),
        ),
    ])
}

fn metadata(spec: &ManifestSpec) -> Node {
    let mut labels = spec.labels.clone();
    labels.insert(SESSION_LABEL.into(), spec.name.clone());
    let mut meta = vec![field("name", spec.name.as_str())];
    if let Some(ns) = &spec.namespace {
        meta.push(field("namespace", ns.as_str()));
    }
    meta.push(field("labels", Node::strings(&labels)));
    Node::Map(meta)
}

fn port(protocol: &'static str, port: u16, end: Option<u16>) -> Node {
    let mut entries = vec![
        field("protocol", Node::Plain(protocol)),
        field("port", port),
    ];
    if let Some(end) = end {
        entries.push(field("endPort", end));
    }
    Node::Map(entries)
}
