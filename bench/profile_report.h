// profile_report — the reporting half of `flashgpt profile` (bench/profile.h): the output
// directory, profile.csv / plan.csv and the JSON beside it (rewritten after every point, each
// to a temporary name then renamed, so an interrupted sweep keeps what it measured), the PNG
// plots through scripts/plot_profile.py, and the tables printed on the terminal.
#pragma once
#include <cstdio>
#include <string>

#include "bench/profile.h"

struct ProfileMeta {
  std::string command, date, gpu, model_desc;  // the CSV/JSON metadata lines
};

// Creates --out (and its parents) and checks that it is writable; throws naming --out.
void make_profile_dir(const std::string& dir);
std::string utc_now();  // 2026-11-22T10:00:00Z
// "d12 (L=12 C=768 NH=12 HS=64, 124.4M parameters at T=1024, rotary positions, recompute none)"
std::string model_description(const ProfileOptions& opt);
// r.csv_path and r.json_path from every point so far.
void write_profile_outputs(const ProfileOptions& opt, const ProfileReport& r, const ProfileMeta& m);
// The Python that has matplotlib: python3 on PATH, else /usr/bin/python3 (a pyenv or conda
// python3 first on PATH often lacks the python3-matplotlib package's); "" when neither has it.
std::string plot_python();
// Runs scripts/plot_profile.py (found beside the working directory or the executable) on csv
// with plot_python(); a missing script or matplotlib is one line on `out`, never an error.
void run_plot_script(const std::string& csv, const std::string& out_dir, std::FILE* out);
// --plan-only's table, the largest T that fits per backend, and the summary line.
void print_plan(const ProfileOptions& opt, const ProfileReport& r, const std::string& cap_src,
                std::FILE* out);
// The GPU sweep's table: header, one row per point as it finishes, then the speedups over
// naive (predicted and measured) and the summary line.
void print_sweep_header(std::FILE* out);
void print_sweep_row(const ProfilePoint& p, std::FILE* out);
void print_sweep_summary(const ProfileOptions& opt, const ProfileReport& r, std::FILE* out);
