// mimalloc: the proxy allocates and frees many small objects per request (headers, JSON values,
// strings) from several threads; measured in bench/README.md ("What each optimisation bought").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // mimalloc asks for transparent huge pages on its arenas (madvise), so memory grows and
    // stays in 2 MiB steps however little of each page is used: 2 000 idle client connections
    // took the process from 33 to 207 MiB, and it stayed there once they had closed
    // (bench/README.md, "Memory after idle connections"). Only this process's pages: the
    // kernel's setting applies to the rest of the system.
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("interlingua: cannot turn transparent huge pages off ({e}); memory may grow in 2 MiB steps");
    }
    interlingua::cli::main()
}
