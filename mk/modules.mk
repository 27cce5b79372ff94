# mk/modules.mk - the module graph: the one place it is written.  The
# Makefile reads it (link order, what each library, program, unit test and
# fuzz target links); tests/layering.sh reads it (which headers each module
# may include, which modules' symbols its objects may use).  One line per
# module; docs/ARCHITECTURE.md describes the modules.
#
# MODS: the libraries (build/lib/lib<m>.a) in link order: a library before
#   every library it uses.
# deps_<m>: every module <m> may use, directly or through another (the
#   closure: a module that uses x also lists what x uses).  Dependencies
#   point down: common <- smtp, dns, sts, proxy, dkim <- router, spool <-
#   config <- delivery <- smtpd <- worker <- master.  config uses dkim to
#   check the DKIM keys at load; mtactl and sendmail are programs.
# pub_<m>: the headers <m> offers the other modules, when not <m>/<m>.h
#   alone ("*": every header).  Another module's *_int.h is never one.
MODS := master worker smtpd delivery config spool router smtp dkim proxy dns sts common
deps_common   :=
deps_dns      := common
deps_sts      := common
deps_proxy    := common
deps_smtp     := common
deps_router   := smtp common
deps_spool    := smtp common
deps_dkim     := common
deps_config   := dkim router smtp proxy dns common
deps_delivery := config dkim spool router smtp proxy dns sts common
deps_smtpd    := delivery config dkim spool router smtp proxy dns sts common
deps_worker   := smtpd delivery config dkim spool router smtp proxy dns sts common
deps_master   := worker smtpd delivery config dkim spool router smtp proxy dns sts common
deps_mtactl   := config dkim spool router smtp proxy dns common
deps_sendmail := config dkim router smtp proxy dns common
pub_common    := *
pub_router    := router/router.h router/route.h
pub_delivery  := delivery/delivery.h delivery/tlsrpt.h
