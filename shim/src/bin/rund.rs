fn main() {
    std::process::exit(rund_shim::cli::main());
}
