// embed PROGRAM.pt2n IN.safetensors OUT.safetensors [--load-library LIB.so]...
//
// Loads a native program from memory, lists its inputs, runs it on a safetensors file and writes
// the outputs as one; on failure prints the error's kind and, for a failed instruction, its node,
// operator and module.
#include <pt2n/runtime.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: embed PROGRAM.pt2n IN.safetensors OUT.safetensors [--load-library LIB.so]...\n";
    return 2;
  }
  try {
    for (int i = 4; i + 1 < argc; i += 2)
      if (std::string(argv[i]) == "--load-library") pt2n::Runtime::load_library(argv[i + 1]);
    std::ifstream f(argv[1], std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    pt2n::Runtime rt = pt2n::Runtime::load_buffer(bytes.data(), bytes.size(), {}, argv[1]);
    for (const pt2n::InputInfo& in : rt.inputs())
      std::cout << "input " << in.key << " (" << in.name << "): " << in.kind
                << (in.kind == "tensor" ? " " + in.dtype + ", rank " + std::to_string(in.rank) : "") << "\n";
    rt.set_inputs_from_safetensors(argv[2]);
    rt.run();
    for (const std::string& key : rt.output_keys()) {
      c10::IValue v = rt.output(key);
      std::cout << "output " << key << ": ";
      if (v.isTensor()) std::cout << v.toTensor().sizes() << "\n";
      else std::cout << v << "\n";
    }
    rt.write_outputs_safetensors(argv[3]);
    return 0;
  } catch (const pt2n::RunError& e) {
    std::cout << "error: " << e.kind() << ": " << e.what() << "\n";
    if (e.debug())
      std::cout << "at instruction " << e.debug()->instruction << ": node '" << e.debug()->node << "', op "
                << e.debug()->op << ", module '" << e.debug()->module << "'\n";
    return 1;
  }
}
