/* Stand-in for libtokentrace.so in the `run` tests: loads, does nothing. */
int tt_cli_test_shim_loaded = 1;
