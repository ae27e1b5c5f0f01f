// toy_zerobench.cpp — zerobench with the toy backend: the whole of adding a backend to the command
// line is the one register_backend line below (and linking the backend's files).
#include "bench/commands/command.hpp"
#include "tests/toy_backend/toy_backend.hpp"

int main(int argc, char** argv) {
  zb::backends::register_backend(zb::toy::backend_info());
  return zb::bench::cli_main(argc, argv);
}
