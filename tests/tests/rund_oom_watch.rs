//! OOM watching ends with the container. Containers come and go in one pod (one shim); the
//! pool is set so each new container reuses the cgroup the previous one gave back. After each
//! Delete the shim holds no more OOM watcher fds (eventfd on v1, inotify on v2) nor fds in
//! total than before, and when a later tenant of the reused cgroup is OOM-killed, TaskOOM names
//! it alone, never a deleted container.

use std::time::Duration;

use rund_tests::cri::api::LinuxContainerResources;
use rund_tests::faults::probe::{agent_placed, fd_count, shim_of, watcher_fds};
use rund_tests::faults::{FaultEnv, GRACE};
use rund_tests::{ContainerSpec, ContainerdOpts, PodSpec, BUSYBOX_IMAGE, K8S_NAMESPACE};

/// No refill, at most one free slot: a released cgroup is the next container's.
const ONE_SLOT_POOL: &str = "pool = \"on\"\nlow = 0\nhigh = 1\nbatch = 1\n";
const CYCLES: usize = 5;

#[test]
fn oom_watchers_end_with_their_container() {
    let test = "oom_watchers_end_with_their_container";
    let Some(env) = FaultEnv::start(test, ContainerdOpts::new().cri(), ONE_SLOT_POOL, "") else {
        return;
    };
    let cri = env.ctd.cri_client().expect("CRI client");
    let before = env.leftovers(&[]);
    let events = env.ctd.watch_events_in(K8S_NAMESPACE).unwrap();
    let pod = PodSpec::new("oom", &env.ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let shim = shim_of(&env.ctd, &pod_id).expect("the pod's shim");
    // Idle means after the agent's move into its cgroup (an fd meanwhile).
    assert!(agent_placed(shim, &pod_id, GRACE), "the agent's placement");
    let idle = (watcher_fds(shim), fd_count(shim).unwrap());

    let mut gone = Vec::new();
    for i in 0..CYCLES {
        let spec = ContainerSpec::new(&format!("c{i}"), BUSYBOX_IMAGE, &["sleep", "100000"]);
        let id = cri.create_and_start(&pod_id, &spec, &pod).expect("start");
        assert!(
            watcher_fds(shim) > idle.0,
            "a started container is watched for OOM"
        );
        cri.stop_container(&id, 0).unwrap();
        cri.remove_container(&id).unwrap();
        // The watcher stops inside Delete: gone when RemoveContainer returns.
        assert_eq!(
            watcher_fds(shim),
            idle.0,
            "cycle {i}: watcher fds of the shim after Delete"
        );
        // The recycle's reset finishes after Delete's reply, on a thread
        // that holds a cgroup file for a moment: every fd is back soon.
        let fds = settled_fds(shim, idle.1);
        assert_eq!(fds, idle.1, "cycle {i}: all fds of the shim after Delete");
        gone.push(id);
    }

    // The next tenant of the recycled cgroup is OOM-killed.
    let mut hog = ContainerSpec::new(
        "hog",
        BUSYBOX_IMAGE,
        &["sh", "-c", "dd if=/dev/zero of=/dev/null bs=128M count=1"],
    );
    hog.resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 32 << 20,
        ..Default::default()
    });
    let hog_id = cri.create_and_start(&pod_id, &hog, &pod).expect("hog");
    events
        .wait_topic(&hog_id, "/tasks/oom", GRACE)
        .expect("TaskOOM for the OOM-killed container");
    events
        .wait_topic(&hog_id, "/tasks/exit", GRACE)
        .expect("its exit");
    // Any OOM event of a deleted container would have come with the hog's.
    std::thread::sleep(Duration::from_millis(500));
    let ooms: Vec<String> = events
        .events()
        .into_iter()
        .filter(|e| e.topic == "/tasks/oom")
        .filter_map(|e| e.field("container_id").map(str::to_owned))
        .collect();
    for id in &gone {
        assert!(
            !ooms.contains(id),
            "TaskOOM for deleted container {id}: {ooms:?}"
        );
    }
    cri.remove_pod(&pod_id);
    drop(events);
    env.assert_clean(&before);
}

/// The shim's fd count once it is `want`, or its count after `GRACE`.
fn settled_fds(shim: u32, want: usize) -> usize {
    let deadline = std::time::Instant::now() + GRACE;
    loop {
        let n = fd_count(shim).unwrap();
        if n == want || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
