//! CRI conformance, the pod network: pods with their own network namespace (a CNI bridge inside
//! a network namespace the harness creates, never on the host), for both runtime handlers.
//! runc is the reference; rund runs with its default config.
//!
//! - a privileged container and one granted NET_ADMIN add a link in the pod's network namespace
//!   (a bridge: this kernel has no dummy driver); a container without it cannot;
//! - a web server binds port 80 and another container of the pod reaches it over the pod IP and
//!   over localhost;
//! - the same with `rund.io/userns: "pod"`: rund gives the pod a user namespace (runc ignores
//!   the annotation), and port 80 still binds.

use rund_tests::cri::{CriFixture, Handler};
use rund_tests::{per_handler, ContainerSpec, ContainerdOpts, PodSpec, BUSYBOX_IMAGE};

const SLEEPER: &[&str] = &["sleep", "100000"];

fn start(h: Handler, test: &str) -> Option<CriFixture> {
    CriFixture::start(h, test, ContainerdOpts::new().pod_network())
}

/// A pod with its own network namespace on the instance's CNI network, logging to a scratch
/// dir.
fn net_pod(fx: &CriFixture, name: &str) -> PodSpec {
    let mut pod = fx.pod_spec(name);
    pod.host_network = false;
    pod.log_directory = fx.scratch(&format!("logs-{name}")).display().to_string();
    pod
}

/// The pod's IP, checked to be on the instance's network.
fn pod_ip(fx: &CriFixture, pod_id: &str) -> String {
    let ip = fx.pod_ip(pod_id);
    let net = fx.ctd.podnet.as_ref().expect("pod network");
    assert!(
        net.contains(&ip),
        "{}: pod IP {ip:?} not in {}",
        fx.handler.name(),
        net.subnet
    );
    ip
}

fn net_admin_and_privileged_add_links(h: Handler) {
    let Some(mut fx) = start(h, "net_admin_and_privileged_add_links") else {
        return;
    };
    let mut pod = net_pod(&fx, "netadmin");
    pod.privileged = true;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let mut privileged = ContainerSpec::new("priv", BUSYBOX_IMAGE, SLEEPER);
    privileged.privileged = true;
    let mut admin = ContainerSpec::new("admin", BUSYBOX_IMAGE, SLEEPER);
    admin.add_capabilities = vec!["NET_ADMIN".into()];
    let plain = ContainerSpec::new("plain", BUSYBOX_IMAGE, SLEEPER);
    let p = fx.run(&pod_id, &privileged, &pod).expect("privileged");
    let a = fx.run(&pod_id, &admin, &pod).expect("NET_ADMIN");
    let n = fx.run(&pod_id, &plain, &pod).expect("plain");

    fx.sh_ok(&p, "ip link add ritpriv type bridge");
    fx.sh_ok(&a, "ip link add ritadm type bridge");
    // The control: without NET_ADMIN the same request is refused.
    let r = fx.sh(&n, "ip link add ritplain type bridge");
    assert_ne!(r.code, 0, "{}: no NET_ADMIN, yet: {r:?}", h.name());
    // All three share the pod's network namespace, and it is not the node's.
    let links = fx.sh_ok(&n, "ip -o link show");
    for want in ["ritpriv", "ritadm", "eth0"] {
        assert!(links.contains(want), "{}: {want} in {links}", h.name());
    }
    assert!(!links.contains("ritplain"), "{}: {links}", h.name());
    assert!(
        !links.contains("rit0"),
        "{}: the bridge is not the pod's: {links}",
        h.name()
    );
    fx.finish();
}

/// Runs a busybox httpd on port 80 in a new container of `pod_id` and checks that `client`
/// reaches it over the pod IP and over localhost.
fn serve_on_80_and_fetch(fx: &CriFixture, pod: &PodSpec, pod_id: &str, client: &str) {
    let page = format!("hello from {} on 80", fx.handler.name());
    let script =
        format!("mkdir -p /www && echo '{page}' > /www/index.html && exec httpd -f -p 80 -h /www");
    let mut web = ContainerSpec::new("web", BUSYBOX_IMAGE, &["sh", "-c", &script]);
    web.log_path = "web.log".into();
    let logs = std::path::PathBuf::from(&pod.log_directory);
    let w = fx.run(pod_id, &web, pod).expect("web server");
    let ip = pod_ip(fx, pod_id);
    for host in [ip.as_str(), "127.0.0.1"] {
        // busybox's wget crashes here (static glibc); nc speaks HTTP/1.0 well enough.
        let fetch = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {host} 80");
        let r = fx.wait_until(client, &fetch);
        if r.code != 0 {
            // Say why: the server may have exited (e.g. bind refused).
            let st = fx.cri.container_status(&w);
            let log = std::fs::read_to_string(logs.join("web.log")).unwrap_or_default();
            panic!(
                "{}: {fetch}: {r:?}\nweb server: {st:?}\nits log: {log}",
                fx.handler.name()
            );
        }
        assert!(
            r.stdout.starts_with("HTTP/1.") && r.stdout.contains(" 200 "),
            "{}: {fetch}: {r:?}",
            fx.handler.name()
        );
        assert_eq!(
            r.stdout.lines().last().map(str::trim),
            Some(page.as_str()),
            "{}: {fetch}",
            fx.handler.name()
        );
    }
    // The server is the one bound to 80 (not something of the node's).
    let st = fx.cri.container_status(&w).expect("ContainerStatus");
    assert_eq!(
        st.state,
        rund_tests::cri::api::ContainerState::ContainerRunning as i32,
        "{}: {st:?}",
        fx.handler.name()
    );
}

fn web_server_on_port_80(h: Handler) {
    let Some(mut fx) = start(h, "web_server_on_port_80") else {
        return;
    };
    let pod = net_pod(&fx, "web");
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let client = ContainerSpec::new("client", BUSYBOX_IMAGE, SLEEPER);
    let c = fx.run(&pod_id, &client, &pod).expect("client");
    serve_on_80_and_fetch(&fx, &pod, &pod_id, &c);
    fx.finish();
}

fn userns_pod_binds_port_80(h: Handler) {
    let Some(mut fx) = start(h, "userns_pod_binds_port_80") else {
        return;
    };
    let mut pod = net_pod(&fx, "usernsweb");
    pod.annotations
        .insert("rund.io/userns".into(), "pod".into());
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let client = ContainerSpec::new("client", BUSYBOX_IMAGE, SLEEPER);
    let c = fx.run(&pod_id, &client, &pod).expect("client");
    let map = fx.sh_ok(&c, "cat /proc/self/uid_map");
    let map = map.split_whitespace().collect::<Vec<_>>().join(" ");
    match h {
        // The annotation is rund's: runc runs the pod as ever.
        Handler::Runc => assert_eq!(map, "0 0 4294967295", "runc"),
        Handler::Rund => assert!(
            !map.starts_with("0 0 "),
            "rund: the pod asked for a user namespace: uid_map {map}"
        ),
    }
    serve_on_80_and_fetch(&fx, &pod, &pod_id, &c);
    fx.finish();
}

per_handler!(
    net_admin_and_privileged_add_links,
    web_server_on_port_80,
    userns_pod_binds_port_80,
);
