// mimalloc: the proxy allocates and frees many small objects per request (headers, JSON values,
// strings) from several threads; measured in bench/README.md ("What each optimisation bought").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    interlingua::cli::main()
}
