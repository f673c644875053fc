# Sourced by guest.sh for the RDMA suite: soft-RoCE on a dummy netdev inside the VM, a smoke
# run of Debian's ib_write_bw (server + client over 10.99.0.1, which exists only inside the VM),
# then the device exported to the tests (tests/tests/rund_rdma_vm.rs compares rund's write-bw).
RXE_DEV=rxe0
RXE_ADDR=10.99.0.1
RXE_ITERS=${RUND_VM_RDMA_ITERS:-100}
RXE_GID=${RUND_VM_RDMA_GID:-1}

soft_roce_up() {
    # rdma_ucm gives /dev/infiniband/rdma_cm, which rund injects with every RDMA device.
    modprobe rdma_rxe && modprobe rdma_ucm || return 1
    ip link add dummy0 type dummy && ip link set dummy0 up &&
        ip addr add "$RXE_ADDR/24" dev dummy0 || return 1
    rdma link add "$RXE_DEV" type rxe netdev dummy0 || return 1
    [ -c /dev/infiniband/uverbs0 ] || { say "no /dev/infiniband/uverbs0"; return 1; }
    [ -c /dev/infiniband/rdma_cm ] || { say "no /dev/infiniband/rdma_cm"; return 1; }
    ibv_devices | grep -qw "$RXE_DEV" || { say "ibv_devices does not list $RXE_DEV"; return 1; }
    say "$RXE_DEV up: port $(cat /sys/class/infiniband/$RXE_DEV/ports/1/state)," \
        "rate $(cat /sys/class/infiniband/$RXE_DEV/ports/1/rate)"
}

# Prints the client's "BW average" (MB/sec) of one ib_write_bw loopback run.
ib_write_bw_loopback() {
    local log=$out/logs/vm.ib_write_bw.log args=(-d "$RXE_DEV" -x "$RXE_GID" -n "$RXE_ITERS")
    timeout 300 ib_write_bw "${args[@]}" >"$log.server" 2>&1 &
    local server=$! i
    # The server listens once it printed its banner; the client retries until then.
    for i in $(seq 1 60); do
        if timeout 300 ib_write_bw "${args[@]}" "$RXE_ADDR" >"$log" 2>&1; then
            wait $server || return 1
            awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ {print $4}' "$log" | tail -1
            return 0
        fi
        grep -q "Couldn't connect" "$log" || break
        sleep 1
    done
    kill $server 2>/dev/null
    return 1
}

soft_roce_smoke() {
    local t0 bw
    t0=$(date +%s)
    if ! soft_roce_up; then
        record vm::soft_roce_up FAIL $(($(date +%s) - t0))
        return 1
    fi
    record vm::soft_roce_up PASS $(($(date +%s) - t0)) "$RXE_DEV on dummy0 $RXE_ADDR"
    t0=$(date +%s)
    # Under TCG perftest's own clock calibration sometimes fails ("Correlation
    # coefficient r^2 < 0.9", "Can't produce a report"): that run, not RoCE,
    # is retried, twice at most.
    local attempt
    for attempt in 1 2 3; do
        bw=$(ib_write_bw_loopback) && [ -n "$bw" ] && break
        bw=""
        grep -q "Can't produce a report" "$out/logs/vm.ib_write_bw.log" || break
        say "ib_write_bw: perftest could not calibrate its clock (attempt $attempt)"
    done
    if [ -z "$bw" ]; then
        record vm::ib_write_bw_loopback FAIL $(($(date +%s) - t0)) "see logs/vm.ib_write_bw.log"
        return 1
    fi
    record vm::ib_write_bw_loopback PASS $(($(date +%s) - t0)) "BW average $bw MB/sec"
    say "ib_write_bw loopback: BW average $bw MB/sec"
    # What tests/tests/rund_rdma_vm.rs runs against (it skips without them).
    export RUND_VM_RDMA_DEV=$RXE_DEV RUND_VM_RDMA_ADDR=$RXE_ADDR RUND_VM_RDMA_NETDEV=dummy0
}
