#include "common/program_main.h"

#include <cstdio>
#include <new>

#include "core/error.h"

namespace ds4::app {

void print_program_error(std::string_view program, const std::string& message) {
  std::string line;
  for (char c : message) {
    if (c == '\n' || c == '\r') {
      if (!line.empty() && line.back() != ' ') line += "; ";
    } else {
      line += c;
    }
  }
  while (!line.empty() && (line.back() == ' ' || line.back() == ';')) line.pop_back();
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(), line.c_str());
}

int parse_and_run(CLI::App& app, int argc, char** argv, std::string_view program, const std::function<int()>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_program_error(program, std::string(e.what()) + " (see " + std::string(program) + " --help)");
    return 1;
  }
  try {
    return run();
  } catch (const Error& e) {
    print_program_error(program, e.what());
  } catch (const std::bad_alloc&) {
    print_program_error(program, "out of memory");
  } catch (const std::exception& e) {
    print_program_error(program, std::string("internal error: ") + e.what());
  }
  return 1;
}

}  // namespace ds4::app
