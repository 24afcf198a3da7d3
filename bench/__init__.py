"""The benchmarks, as a package: run from the repository root as modules
(`python3 -m bench.e2e_decode ...`, `python3 -m bench.peers ...`), and
imported by the tests (`from bench import e2e_batches`; pyproject.toml puts
the repository root on pytest's sys.path). The C++ and CUDA benchmarks
beside them build with CMake (bench/CMakeLists.txt)."""
