// The last lines every model-opening program's main shares: parse the
// flags, run, and report any failure as one line "PROGRAM: message" with
// exit status 1 (a bad flag adds "(see PROGRAM --help)"); --help and
// --version print to stdout with status 0.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <string_view>

namespace ds4::app {

// "PROGRAM: message" on stderr, the message's line breaks as "; ".
void print_program_error(std::string_view program, const std::string& message);

// Parses argv into `app`, then returns run()'s status; ds4::Error,
// std::bad_alloc and other exceptions from run() become one error line.
int parse_and_run(CLI::App& app, int argc, char** argv, std::string_view program, const std::function<int()>& run);

}  // namespace ds4::app
