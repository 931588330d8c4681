fn main() -> std::process::ExitCode {
    interlingua::cli::main()
}
