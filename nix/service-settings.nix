# The service's fixed settings (nix/service-hardening.json, which `quest-runner systemd-unit`
# embeds) as attribute sets: { unit, service, install }, each mapping a systemd key to its
# value. The NixOS and home-manager modules build their units from this, so they cannot drift
# from the printed unit. Only builtins, so tests/suite/deploy.rs can evaluate it without nixpkgs.
let
  settings = builtins.fromJSON (builtins.readFile ./service-hardening.json);
  toAttrs =
    list:
    builtins.listToAttrs (
      map (s: {
        name = s.key;
        inherit (s) value;
      }) list
    );
in
{
  unit = toAttrs settings.unit;
  service = toAttrs settings.service;
  install = toAttrs settings.install;
}
