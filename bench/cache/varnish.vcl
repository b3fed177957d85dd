vcl 4.1;
# bench/cache: Varnish in front of the origin (its defaults: TTL from Cache-Control).
backend origin {
    .host = "127.0.0.1";
    .port = "@ORIGIN_PORT@";
}
