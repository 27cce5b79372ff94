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
#   point down: common <- bclass, grey, milter, sasl, shape, smtp, dns,
#   sts, proxy, dkim <- router, spool <- config <- events, tlspol <-
#   delivery <- smtpd <- worker <- master; cluster (config, shape)
#   is used by the master (it forks the sync agent).  config uses dkim to check the
#   DKIM keys at load and bclass to load the bounce classes; events uses
#   config and spool; mtactl and sendmail are programs (mtactl uses
#   delivery for `tls check`).
# pub_<m>: the headers <m> offers the other modules, when not <m>/<m>.h
#   alone ("*": every header).  Another module's *_int.h is never one.
# seam_<file>: headers beyond the contracts that one named file may include
#   (mtactl's tls check runs the delivery's MX resolution and TLS client).
MODS := master cluster worker smtpd delivery events tlspol shape config spool router smtp dkim proxy dns sts bclass grey milter sasl common
deps_common   :=
deps_dns      := common
deps_sts      := common
deps_proxy    := common
deps_smtp     := common
deps_router   := smtp common
deps_spool    := smtp common
deps_dkim     := common
deps_bclass   := common
deps_grey     := common
deps_milter   := common
deps_sasl     := common
deps_shape    := common
deps_config   := dkim router smtp proxy dns bclass common
deps_tlspol   := spool router smtp dns sts common
deps_cluster  := config shape dkim router smtp proxy dns bclass common
deps_events   := config spool dkim router smtp proxy dns bclass common
deps_delivery := events tlspol shape config dkim spool router smtp proxy dns sts bclass common
deps_smtpd    := delivery events tlspol shape config dkim spool router smtp proxy dns sts bclass grey milter sasl common
deps_worker   := smtpd delivery events tlspol shape config dkim spool router smtp proxy dns sts bclass grey milter sasl common
deps_master   := cluster worker smtpd delivery events tlspol shape config dkim spool router smtp proxy dns sts bclass grey milter sasl common
deps_mtactl   := delivery events tlspol shape config dkim spool router smtp proxy dns sts bclass common
deps_sendmail := config dkim router smtp proxy dns bclass common
pub_common    := *
pub_router    := router/router.h router/route.h
pub_delivery  := delivery/delivery.h
seam_mtactl/tls_check.c := delivery/mta.h delivery/resolve.h
seam_mtactl/tls_probe.c := delivery/mta.h
