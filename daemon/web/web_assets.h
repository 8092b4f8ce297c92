// The web page's static files, built into plateaud (daemon/web/BUILD embeds
// them at build time: the page's own script and style from
// daemon/web/static/, and uPlot from where deploy/install-deps.sh put it).
#ifndef PLATEAU_DAEMON_WEB_WEB_ASSETS_H_
#define PLATEAU_DAEMON_WEB_WEB_ASSETS_H_

#include <map>
#include <string>
#include <string_view>

namespace plateau::daemon {

struct WebAsset {
  std::string_view content_type;
  std::string_view body;
};

// By path: "/static/plateau.js", "/static/uPlot.iife.min.js", ...
const std::map<std::string, WebAsset>& WebAssets();

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_WEB_WEB_ASSETS_H_
