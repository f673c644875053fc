fn main() {
    std::process::exit(rund_shim::entry::main());
}
