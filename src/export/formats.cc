// The registry of export formats: a new format is a new Exporter in this folder and one line
// here.
#include "export/chrome_exporter.h"
#include "export/exporter.h"

namespace tokentrace::exporters {

std::span<const Format> Formats() {
  static const Format kFormats[] = {
      {"chrome", ".json", "JSON", kChromeHelp, &MakeChromeExporter},
  };
  return kFormats;
}

}  // namespace tokentrace::exporters
