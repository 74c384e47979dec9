// The dashboard's page, script and style sheet (scheduler/dashboard/), compiled into
// the scheduler by a genrule (bazel/embed_files.py): the dashboard needs no files at
// run time and works offline.
#ifndef DROVER_SCHEDULER_DASHBOARD_ASSETS_H_
#define DROVER_SCHEDULER_DASHBOARD_ASSETS_H_

#include <cstddef>

namespace drover {

struct EmbeddedFile {
  const char* path;          // "/index.html"
  const char* content_type;
  const char* data;
  size_t size;
};

extern const EmbeddedFile kDashboardAssets[];
extern const size_t kDashboardAssetsCount;

}  // namespace drover

#endif  // DROVER_SCHEDULER_DASHBOARD_ASSETS_H_
